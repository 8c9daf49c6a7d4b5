"""The source's binary log: its files on the server or in an archive, and its events decoded.

``files``: the server's binlog files (listing, purge detection, timestamp startup, purge
forecasting).
"""
