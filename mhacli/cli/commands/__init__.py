"""One module per group of commands; mhacli.cli.app registers each command function in COMMANDS."""
