from bench import config
from bench.cli import main

config.ENTRY_POINT = True  # the frameworks' native start-up notices off the terminal (bench.config.quiet_frameworks)
raise SystemExit(main())
