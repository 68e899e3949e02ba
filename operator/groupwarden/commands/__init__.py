"""CLI subcommands: each module registers its parser and runs one command."""
