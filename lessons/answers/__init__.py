"""Worked answers to the exercises of lessons/README.md, one module each, each runnable:
``python -m lessons.answers.NAME``. tests/test_lessons.py runs them and checks what they find."""
