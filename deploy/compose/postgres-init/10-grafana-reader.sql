-- Runs once, when the postgres volume is created. Grafana reads the rollups through a
-- role that can only SELECT: a dashboard query can never change the service's data.
CREATE ROLE grafana_reader LOGIN PASSWORD 'grafana_reader';
GRANT CONNECT ON DATABASE ett TO grafana_reader;
GRANT USAGE ON SCHEMA public TO grafana_reader;
-- Tables are created later by `ett migrate` (as the ett role): grant on those too.
ALTER DEFAULT PRIVILEGES FOR ROLE ett IN SCHEMA public GRANT SELECT ON TABLES TO grafana_reader;
