"""The collapse benchmark: methods × seeds × tasks with equal budgets, exact distances to the filtered model where
the valid set is enumerable, seed confidence intervals, paired differences against the stock baseline, and the
β sweep of the seed paper's question (``rlvr-div collapse --config bench/collapse.yaml``; docs/study/collapse.md)."""
