"""blinkflow.bench"""
