"""PRO-ConvQA dense phrase index: answers by maximum inner product search over phrase vectors."""
