"""``python -m fluence.kubectl``: the same as the ``kubectl-fluence`` plugin."""

from fluence.kubectl.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
