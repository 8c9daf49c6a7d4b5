"""What binlake needs to run on local Spark (``local[N]``, a laptop or a CI box): the Python
worker daemon Spark starts its tasks from, and the JVM class archive local Spark JVMs start
from. Development tooling (a local MariaDB, a Spark Connect server, the warm-up, the demo) is
``binlake.devtools``."""
