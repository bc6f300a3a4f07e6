"""One module per database: all of its SQL, DDL and driver handling (see ``base.Dialect``)."""
