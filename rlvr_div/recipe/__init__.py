"""The recipe layer: the keys a recipe may hold (:mod:`~rlvr_div.recipe.keys`), reading it the TRL way
(:mod:`~rlvr_div.recipe.parse`) and the checks made before any model loads (:mod:`~rlvr_div.recipe.checks`).
``train``, ``rehearse``, the demo and the benchmarks all start here; nothing here loads a model.

Relative paths, in a recipe or on the command line, are relative to the current directory, as in TRL (``data_path``,
``model_name_or_path``, ``rehearsal_path``, ``output_dir``, ``resume_from_checkpoint``); the recipes under
``recipes/`` are written to run from the repository root. A relative path that does not exist is reported with the
directory it was looked up in.
"""

from rlvr_div.recipe.checks import check_vllm, validate
from rlvr_div.recipe.keys import ScriptArguments
from rlvr_div.recipe.parse import load_recipe, parse_recipe, read_yaml_mapping

__all__ = ["ScriptArguments", "check_vllm", "load_recipe", "parse_recipe", "read_yaml_mapping", "validate"]
