"""User-facing applications (the Gradio chat demo)."""
