"""The campaign dashboard's data side: reading a campaign back from the object store for
``dashboards/app.py`` (Streamlit), and its charts' Vega-Lite specs (``charts``). No Prefect and
no Streamlit are imported here."""

from spade.dashboard.data import CampaignData, EnvDetail
from spade.dashboard.summary import Overview, RoundSummary

__all__ = ["CampaignData", "EnvDetail", "Overview", "RoundSummary"]
