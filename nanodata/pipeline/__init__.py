"""Corpus builds: each step a plain function with a CLI face, streaming its input.

download (pretraining shards over HTTP) · chunking (C++ at function boundaries with tree-sitter) ·
jsonl + to_parquet (JSONL → shuffled parquet shards + manifest) · tokenizer_train · pretokenize
(.npy token shards) · workers (process pools safe to start from Airflow's task runner).
"""
