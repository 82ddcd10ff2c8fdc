"""nanodata: the data layer for nanochat-style LLM pretraining.

The library never imports Airflow; trainers install it without Airflow.
Heavy modules (torch, tree-sitter, google-cloud-storage) are imported by the
submodules that need them, so `import nanodata` stays cheap.
"""

__version__ = "0.1.0"
