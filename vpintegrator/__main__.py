"""``python -m vpintegrator``: lists the commands; ``python -m vpintegrator gen ...`` runs ``vp-gen ...``."""

from vpintegrator.cli.group import main

if __name__ == "__main__":
    main(prog_name="python -m vpintegrator")
