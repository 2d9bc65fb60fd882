"""``python -m mhacli`` behaves exactly like the ``mha`` command."""

from mhacli.cli.app import main

if __name__ == "__main__":
    main()
