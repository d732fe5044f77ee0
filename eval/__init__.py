"""pass@k evaluation: does RL fine-tuning collapse a model's coverage compared with its base?"""
