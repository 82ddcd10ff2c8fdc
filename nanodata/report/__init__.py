"""Build reports: `corpus_report` writes a build's counts and plots (`svgplot`); `index` finds builds, local or
gs://, and keeps their reports current for the Airflow reports plugin."""
