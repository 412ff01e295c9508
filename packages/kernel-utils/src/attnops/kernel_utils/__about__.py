__version__ = "0.1.12"
