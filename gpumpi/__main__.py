"""``python -m gpumpi``: the launcher, or the ``gpumpi`` tools (L6).

``python -m gpumpi -n N prog args...`` is ``gpumpirun -n N prog args...``
(:func:`gpumpi.launch.main`).  With ``bench`` or ``info`` as the first argument it
is the ``gpumpi`` command instead (:func:`gpumpi.cli.main`, imported only then).
"""

from __future__ import annotations

import importlib
import sys
from typing import Sequence

_TOOLS = ("bench", "info")


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in _TOOLS:
        try:
            cli = importlib.import_module("gpumpi.cli")
        except ModuleNotFoundError as e:
            if e.name != "gpumpi.cli":
                raise
            print(f"gpumpi: the {args[0]!r} command is not available (gpumpi.cli is missing)", file=sys.stderr)
            return 1
        sys.argv = ["gpumpi", *args]  # the gpumpi command reads its arguments from sys.argv
        code = cli.main()
        return code if isinstance(code, int) else 0
    from .launch import main as launch_main

    return launch_main(args)


if __name__ == "__main__":
    sys.exit(main())
