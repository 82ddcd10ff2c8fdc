"""nanodata's distributed pretraining loaders (drop-in for nanochat's): parquet -> tokens -> (B, T) batches.

source.py reads this rank's documents, packing.py packs them best-fit, loader.py ties them to the device;
config.py holds the settings (LoaderConfig) the loaders check once.
The loaders are imported on first use, so `nanodata.loader.packing` (used by the build report) needs no torch.
"""

from nanodata.loader.packing import simulate_crop_fraction

LOADERS = ("tokenizing_distributed_data_loader_with_state_bos_bestfit",
           "tokenizing_distributed_data_loader_bos_bestfit",
           "tokenizing_distributed_data_loader_with_state",
           "tokenizing_distributed_data_loader")
# gather_states: every rank's state, for a resume at another world size; bestfit_loader and concat_loader take a
# LoaderConfig (config.py) where the nanochat-compatible LOADERS take keyword arguments
FROM_LOADER = (*LOADERS, "gather_states", "bestfit_loader", "concat_loader", "LoaderConfig", "Source")
__all__ = [*FROM_LOADER, "simulate_crop_fraction"]


def __getattr__(name: str):
    if name in FROM_LOADER:
        from nanodata.loader import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'nanodata.loader' has no attribute {name!r}")
