"""Hopper (sm_90a) convolution kernels: the Tensor Memory Accelerator feeding warp-specialized, persistent
wgmma warpgroups. geometry.py (the forward form and its tensor maps), schedule.py (the persistent tile
schedule), config.py (tile configs and their limits), mainloop.py (producer and consumer roles),
epilogue.py (bias, cast, TMA store), kernel.py (the kernel and its launch)."""
