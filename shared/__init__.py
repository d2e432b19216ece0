"""Framework-free front end of the SPINN suite.

Transitions, SNLI reading, vocabulary, GloVe, batching, canonical parameters
and the float64 NumPy reference SPINN. Nothing in this package imports
PyTorch, TensorFlow or JAX.
"""
