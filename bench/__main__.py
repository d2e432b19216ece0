import sys

try:
    from bench import frameworks  # noqa: F401  (the registry loads the plugins here: one that fails is said below)
    from bench.cli import main
except ImportError as err:  # a plugin refused (bench.frameworks.PluginError): said in one line
    if type(err).__name__ != "PluginError":
        raise
    print(f"error: {err}", file=sys.stderr)
    raise SystemExit(2) from None

raise SystemExit(main())
