"""A preload module that makes its importer 200 MiB larger (resident: touched), as a
big library's data would: loaded into a serving zygote, every step forked after it
begins with those pages."""

BLOB = bytearray(b"\x01" * (200 << 20))
