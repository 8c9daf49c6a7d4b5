"""The source's binary log: its files on the server or in an archive, and its events decoded.

- ``files``: the server's binlog files (listing, purge detection, timestamp startup, purge
  forecasting); ``archive``: binlog files kept in a directory.
- ``dump`` and ``archive`` deliver raw events; ``stream`` parses them into events with one
  parser (``events``, ``table_map``, ``wire``) whichever delivered them.
- ``rows`` decodes row images to canonical texts, ``jsonb`` MySQL's binary JSON to MySQL's
  text, ``schema`` a TABLE_MAP to binlake's table schema, ``boundaries`` says where a
  transaction ends.
"""
