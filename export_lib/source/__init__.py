"""Reading the reporting source: connections, database access and type mapping, SQL building,
and the demo source."""
