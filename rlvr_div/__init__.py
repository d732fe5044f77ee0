"""rlvr-div: RL fine-tuning from verifiable rewards that keeps the diversity of the base model."""

__version__ = "0.1.0"
