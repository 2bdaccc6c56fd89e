"""The `loadgen` subcommands, one module each: parse the options (options.py declares the
shared groups once), call the stage that does the work, print what it returns."""
