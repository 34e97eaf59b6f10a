"""analysis/metrics"""
