"""Stand-in for the ``crc32c`` package the testbench imports: the same function on
google-crc32c, which google-cloud-storage already installs (one CRC32C implementation, no
extra dependency)."""

import google_crc32c


def crc32c(data, value=0):
    return google_crc32c.extend(value, bytes(data))
