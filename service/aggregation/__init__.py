"""Parts of the aggregation flow (`service.aggregate`): the running-job cache between
passes and the full recompute shared by several processes."""
