"""A trainer process for the shutdown fault suite (gcs_exit.py): iterates the gs:// best-fit loader, saying where it
is on stdout so the parent can kill the emulator at that point, and ends as the case says.

argv: URI CASE PHASE STATE_FILE
  CASE  open: the loader is never closed (exit with it alive); closed: loader.close() before exit;
        with: the loader is used as a context manager
  PHASE first-read | mid | before-exit | resume (STATE_FILE: a state to resume from)
Exit status: 0, or 3 after printing the NanodataError the loader raised; anything else is a failure.
"""

import contextlib
import json
import sys

from nanodata.errors import NanodataError
from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit
from nanodata.tokenizer import load

BATCHES = 400  # past the first epoch of the suite's corpus: the loader needs the bucket again after a kill
KEPT = []  # a loader of the `open` case, alive until the interpreter exits


def say(word: str) -> None:
    print(word, flush=True)


def iterate(loader, phase: str) -> None:
    for k in range(1, BATCHES + 1):
        next(loader)
        say(f"batch {k}")
        if phase == "before-exit" and k == 3:
            say("done")
            sys.stdin.readline()  # the parent kills the emulator, then lets us exit
            return


def main() -> int:
    uri, case, phase, state_file = sys.argv[1:5]
    tokenizer = load("cl100k_base")
    resume = json.loads(open(state_file).read()) if phase == "resume" else None
    say("start")
    try:
        loader = bestfit(tokenizer, 2, 64, "train", data_dir=uri, device="cpu", tokenizer_batch_size=8,
                         buffer_size=30, resume_state_dict=resume)
        if case == "with":
            with loader:
                iterate(loader, phase)
        else:
            KEPT.append(loader)
            iterate(loader, phase)
            if case == "closed":
                loader.close()
    except NanodataError as exc:
        print(f"NanodataError: {exc}", file=sys.stderr)
        if case == "closed":
            with contextlib.suppress(NameError):
                loader.close()
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
