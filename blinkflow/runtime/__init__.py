"""blinkflow.runtime"""
