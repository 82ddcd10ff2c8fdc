"""Build reports: `figures` computes a build's counts (report.json), `page` draws them (SVG plots by `svgplot`, and
index.html), `corpus_report` writes them beside the build and is `nanodata report`; `index` finds builds, local or
gs://, and keeps their reports current for the Airflow reports plugin."""
