"""The example conversation and voice message, shipped in the wheel as `pgmem.examples` for `pgmem demo`."""
