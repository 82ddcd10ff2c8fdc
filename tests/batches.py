"""Loader batches taken for comparison, shared by tests/loader and tests/xla: tensors copied to the host."""

import json


def as_json(state):
    return json.loads(json.dumps(state))


def take(loader, n):
    """n batches as (inputs, targets, state), the tensors copied to the host (a device's or a held buffer's values,
    compared later)."""
    out = []
    for _ in range(n):
        inputs, targets, state, *_ = next(loader)
        out.append((inputs.cpu().clone(), targets.cpu().clone(), as_json(state)))
    return out
