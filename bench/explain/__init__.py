"""``python -m bench explain``: what each framework builds for one small batch, read by its Platform (the "explain"
methods of ``shared/platform.py``, implemented in ``impl_<framework>/explain.py``); its modules: README.md."""
