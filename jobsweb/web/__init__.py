"""The admin screen: pages rendered on the server, htmx for the live parts, sign-in and roles.

Imports every layer below it; nothing below imports it.
"""
