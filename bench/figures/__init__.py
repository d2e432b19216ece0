"""The docs' figures (drawn by ``python -m bench render``, bench/render/command.py) and the suite's plot style."""
