from bench.cli import main
from bench.config import filter_native_noise

filter_native_noise()  # the frameworks' native start-up notices off the terminal
raise SystemExit(main())
