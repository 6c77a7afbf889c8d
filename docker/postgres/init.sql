-- init.sql runs once, at image build time.
CREATE ROLE outbox WITH LOGIN SUPERUSER PASSWORD 'outbox';
CREATE DATABASE outbox OWNER outbox;
\connect outbox
CREATE EXTENSION pg_stat_statements;
