"""The mpcbench leaderboard.

- :mod:`leaderboard.ranking`: records -> frame -> aggregate -> rank (plain pandas, no Streamlit).
- :mod:`leaderboard.submissions`: safe loading of ``records/<entry>/`` folders and results stores.
- :mod:`leaderboard.app`: the Streamlit page (``streamlit run leaderboard/app.py``); it only renders.
- :mod:`leaderboard.screenshot`: serve the app and capture it in headless Chromium.

Nothing is imported here, so ``import leaderboard.ranking`` stays cheap and Streamlit-free.
"""
