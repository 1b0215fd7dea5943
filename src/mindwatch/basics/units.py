"""The run log's units, defined once (docs/log-format.md)."""

# Device memory (``mem_used_mb``, framework ``*_mb``): what npu-smi and nvidia-smi print as
# MB/MiB, so our figures and theirs compare.
MB = 2 ** 20          # bytes
# Host memory (``mem_used_gb``, ``rss_gb``): decimal, as psutil's figures are usually quoted.
GB = 1e9              # bytes
# Device memory shown in GB: 2**30 bytes, i.e. 1024 of the MB above.
MB_PER_DEVICE_GB = 2 ** 30 // MB
