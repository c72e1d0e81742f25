"""The dashboard's pages, one Streamlit script per file (shipped inside the package as ``lastgood.pages``;
the router and links find them through ``lastgood.ui.navigation``)."""
