"""Development tooling: what ``make demo``, ``make setup`` and the tests run beside binlake, never
binlake itself (import-linter keeps product code from importing it).

``mariadb``: a throwaway local MariaDB with the binlog set up; ``connect_server``: a local Spark
Connect server with Delta; ``warm``: the Spark warm-up of ``make setup`` (jars, class archive);
``demo``: ``make demo``.
"""
