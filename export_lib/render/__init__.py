"""Rendering a window to CSV or Parquet from one streaming COPY reader, hashing on the way."""
