"""analysis/checks"""
