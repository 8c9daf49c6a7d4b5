"""The vocabulary every layer shares: the lakehouse's tables and their schemas, binlog
positions and the change sequence, the change log's ops, the type mapping, DDL effects and
SQL quoting. It imports nothing of binlake but the errors and the config, so each layer
above (source, bronze, silver, gold, the commands) can use it without importing another."""
