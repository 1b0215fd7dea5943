"""Views of a finished or running run: verdict, HTML report, live terminal view."""
