from django.db import models


class Order(models.Model):
    total = models.IntegerField()
    note = models.CharField(max_length=100, blank=True, default="")
