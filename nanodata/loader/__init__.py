"""nanodata's distributed pretraining loaders (drop-in for nanochat's): parquet -> tokens -> (B, T) batches.

source.py reads this rank's documents, packing.py packs them best-fit, loader.py ties them to the device.
"""

from nanodata.loader.loader import (tokenizing_distributed_data_loader,
                                    tokenizing_distributed_data_loader_bos_bestfit,
                                    tokenizing_distributed_data_loader_with_state,
                                    tokenizing_distributed_data_loader_with_state_bos_bestfit)
from nanodata.loader.packing import simulate_crop_fraction

__all__ = ["tokenizing_distributed_data_loader_with_state_bos_bestfit", "tokenizing_distributed_data_loader_bos_bestfit",
           "tokenizing_distributed_data_loader", "tokenizing_distributed_data_loader_with_state",
           "simulate_crop_fraction"]
