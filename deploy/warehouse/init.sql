-- The demo hospital's clinical data warehouse (docker-compose.yml, profile "warehouse"):
-- a small subset of the OMOP CDM (person, measurement), filled on the database's first
-- start from the records `ldpem generate` wrote to /seed/records.csv (standardized
-- values: a synthetic study, not real measurements), and a read-only role for the agent.
-- Run by the official postgres image's entrypoint (psql, as the admin user, database cdm).
\set ON_ERROR_STOP on

CREATE SCHEMA cdm;
CREATE TABLE cdm.person (
    person_id      bigint PRIMARY KEY,
    year_of_birth  integer NOT NULL
);
CREATE TABLE cdm.measurement (
    measurement_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    person_id               bigint NOT NULL REFERENCES cdm.person,
    measurement_concept_id  integer NOT NULL,
    measurement_date        date NOT NULL,
    value_as_number         double precision
);
CREATE INDEX measurement_person ON cdm.measurement (person_id, measurement_concept_id);

-- One row per record, in file order (the identity numbers the rows as they are read).
CREATE TEMP TABLE extract (
    person_id  bigint GENERATED ALWAYS AS IDENTITY,
    x1 double precision, x2 double precision, x3 double precision, y double precision
);
\copy extract (x1, x2, x3, y) FROM '/seed/records.csv' WITH (FORMAT csv, HEADER true)

INSERT INTO cdm.person SELECT person_id, 1940 + person_id % 60 FROM extract;
-- Long format, one measurement per person and concept, as a CDM holds them:
-- 3038553 body mass index, 3027018 heart rate, 3025315 body weight, 3004410 HbA1c.
INSERT INTO cdm.measurement (person_id, measurement_concept_id, measurement_date, value_as_number)
SELECT e.person_id, m.concept, DATE '2024-01-15', m.value
FROM extract e
CROSS JOIN LATERAL (VALUES (3038553, e.x1), (3027018, e.x2), (3025315, e.x3), (3004410, e.y))
    AS m (concept, value)
ORDER BY e.person_id, m.concept;

-- The agent reads with this role only: SELECT on the CDM tables, nothing else.
CREATE ROLE ldpem_reader LOGIN PASSWORD 'demo-warehouse-reader-NOT-SECRET';
GRANT USAGE ON SCHEMA cdm TO ldpem_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA cdm TO ldpem_reader;
