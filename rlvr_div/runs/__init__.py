"""Run plumbing under a run's output directory: one writer at a time (the lock), the disk-space checks, the order a
resumed run takes. The directory itself, tied to the recipe, is :mod:`rlvr_div.run_dir`."""
