"""The source's binary log: its files on the server or in an archive, and its events decoded.

``files``: the server's binlog files (listing, purge detection, timestamp startup, purge
forecasting).

``jsonb``: MySQL's binary JSON (column type 245) as the text MySQL returns for it, and the
partial JSON updates of PARTIAL_UPDATE_ROWS_EVENT applied to the before image.
"""
