import sys

try:
    from bench import config
    from bench.cli import main
except ImportError as err:  # a plugin refused (bench.frameworks.PluginError): said in one line
    if type(err).__name__ != "PluginError":
        raise
    print(f"error: {err}", file=sys.stderr)
    raise SystemExit(2) from None

config.ENTRY_POINT = True  # the frameworks' native start-up notices off the terminal (bench.config.quiet_frameworks)
raise SystemExit(main())
