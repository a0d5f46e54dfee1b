"""Worked examples that use convlab from PyTorch (need the ``torch`` extra; ``import convlab`` does not
import them): ``shapes`` (a synthetic dataset, numpy only), ``train_cnn`` (train a small CNN with
convlab's kernels and with cuDNN, same seeds) and ``training_report`` (its summary and figure)."""
