"""What every layer shares: settings, errors, the database and its tables, logging."""
